"""Benchmarks, installed with the package: `policyforge bench NAME [args]` runs `NAME.py` here (`-` for `_`), as
does `python -m policyforge.bench.NAME`. `policyforge bench NAME --help` lists a benchmark's options.

They print their tables (BENCHMARKS.md holds the latest), write any files under the working directory (`bc-table`
and `finetune-table`: ./bench/results/ by default) and read recipes by name (./configs, else the source checkout's
configs/). Three need files of a source checkout unless given others: `robustness` probes a checkout (`--tree`);
`control-loop`, `deploy-under-load` and `safety-fuzz` run the exported test policies of tests/real_robot/assets/
(`--policy`). `robustness_*` and `control_loop` also hold what the others import.
"""
