"""The ground floor: values and interfaces (Config, Problem, Target, SearchSpace, results, static
features, the op protocol). Imports nothing else of autotune, and nothing heavy."""
