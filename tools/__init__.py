"""Project tooling beside the package: the static site, browser-test helpers, notebook hygiene."""
