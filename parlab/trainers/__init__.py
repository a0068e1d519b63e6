"""One module per scheme: the training loop each scheme runs on every rank.

Every module here is imported by `parlab.schemes()` / `parlab.run` and registers its workers with
`parlab.runner.register`. (The package is not called `schemes`: importing `parlab.schemes` would
rebind the name of the `parlab.schemes()` function.)
"""
