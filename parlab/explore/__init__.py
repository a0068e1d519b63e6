"""The code each chapter's notebook runs, one module per chapter: experiments, rank workers, and the
functions behind the widgets. Notebooks import from here; they never define code that ranks run."""
