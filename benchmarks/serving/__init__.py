"""The serving benchmark (`benchmarks/serving_bench.py`), one job per module:

settings, engine_flags   what every configuration is started with: engine flags sized for the run, --server-flags
kinds                    the configurations, and which of them the installed vLLM has
workload                 the prompt, sampling, seeds and token counts of each kind of round
server_kinds             per server kind: its command, environment, readiness probe and served context
server_logs, launcher    starting, describing and stopping one server process
offline_worker, offline_process
                         vLLM's LLM.generate in a process of its own, and that process's life
cpu_accounting           CPU seconds of processes (from /proc/<pid>/stat) over a round
streams                  one stream's timing (TokenClock, StreamResult) and a load client (Scenario)
ours_driver, openai_driver, vllm_grpc_driver
                         the load clients: one stream over each server's own protocol
configuration, scenarios a configuration's warm-up and measured round; which ones run on each kind
round_result, measurement, offline_rounds
                         one measured round: streamed (streams, CPU differences, TTFT rounds) or offline
schedule                 warm-up rounds, then cycles of measured rounds in a rotating order; side by side
                         or one configuration at a time
summary, goals           medians per configuration; goals judged on per-cycle ratios or pooled TTFTs
machine, report, progress  what is printed
cli                      flags, the run as a whole, the JSON document
"""
