"""The engine: `parlab.run` (`runner`, with `run_config`: the validated configuration, and
`run_result`: what it returns) and the scheme registry (`registry`), the one training
loop every scheme drives through a small strategy object (`loop`), the single-process reference
(`reference`) and the comparison with it (`verify`)."""
