"""Every registered scheme's module, imported: the forkserver imports this once (it is in
`parlab.core.launch.PRELOAD`), so each rank it starts inherits every scheme already compiled.

Without it each rank imported the ~40 scheme modules itself at its first `get_scheme` — about a
quarter of a second of compiling per rank per launch where no bytecode cache is written
(PYTHONDONTWRITEBYTECODE), which was most of a short test run's time.
"""

from parlab.engine.registry import schemes

schemes()

from parlab.models.data import text_tokens  # noqa: E402

text_tokens()  # the text dataset every GPT rank reads: read once here, inherited by each rank
