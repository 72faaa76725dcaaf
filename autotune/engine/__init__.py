"""The tuning engine: strategies, the benchmarker, the runner, workers, compilation and the cost model.
Imports `autotune.core` only."""
