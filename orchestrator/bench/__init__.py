"""`tokenfactory bench`: the public serving benchmarks' load, on searched layouts.

`load` makes the users' sessions, `layouts` and `screen` choose the layouts (`clusters`
turns one into a cluster description), `plan` resolves the points, `run` replays them
on local cores, `measure` takes each point's figures, `frontier` the Pareto frontier,
`output` the files. docs/bench.md says what each figure means.
"""
