"""The serving benchmark (`benchmarks/serving_bench.py`), one job per module:

  settings, workload       what is run: engine flags, server kinds, the prompt, seeds and token counts
  server_kinds             per server kind: its command, environment, readiness probe and served context
  server_logs, launcher    starting, describing and stopping one server process
  cpu_accounting           CPU seconds of processes, from /proc/<pid>/stat
  streams                  one stream's timing (TokenClock, StreamResult) and a configuration (Scenario)
  ours_driver, openai_driver, vllm_grpc_driver, scenarios
                           the load clients: one stream over each server's own protocol
  round_result, measurement  one measured round: streams, CPU differences, TTFT rounds
  schedule                 warm-up rounds, then cycles of measured rounds in a rotating order
  summary, goals           medians per configuration; goals judged on per-cycle ratios or pooled TTFTs
  machine, report, progress  what is printed
  cli                      flags, the run as a whole, the JSON document
"""
