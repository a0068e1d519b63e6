"""The engine: `parlab.run` (`runner`) and the scheme registry (`registry`), the one training
loop every scheme drives through a small strategy object (`loop`), the single-process reference
(`reference`) and the comparison with it (`verify`)."""
