"""One module per scheme. Every module here is imported by `parlab.schemes()` / `parlab.run`, and
registers its workers with `parlab.runner.register`."""
