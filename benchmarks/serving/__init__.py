"""The serving benchmark (`benchmarks/serving_bench.py`), one job per module, each importing only those above it:

settings      what a run is started with and asks for: engine settings and flags, the configurations' kinds, the
              workload, the machine, the benchmark's error and its progress lines (shared with the other benchmarks)
servers       per server kind its command, environment, readiness probe and served context; one server's life;
              CPU seconds of processes over a round
drivers       one stream's timing and a load client (Scenario); one driver per server's own protocol
measurement   one measured round (RoundResult), a configuration as the schedule runs it, a streamed round, the
              medians per configuration, the run's outcome
offline       vLLM's LLM.generate in a process of its own: the worker, that process's life, its rounds
report        the goals (judged on per-cycle ratios or pooled TTFTs) and the printed report
charts        the PNG drawn beside a benchmark's JSON document (this one's and benchmarks/poc_bench.py's)
cli           flags, which configurations run on each kind, the schedule, the run as a whole, the JSON document
"""
