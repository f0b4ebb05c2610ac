"""`compare`: an offline run of the DDTree reference code against a replay of its prompts.

`runfile` reads the run (`benchmark.py --save-path`), `records` holds the replaying side
(SGLang's engine records, or `replay`'s run of the tool's reference decoder), `analysis`
compares the two and `report` renders the table, the JSON and the plot.
"""
