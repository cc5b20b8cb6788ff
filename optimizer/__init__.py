"""taso.optimizer: the cost-based search (taso-opt). `search.optimize` is the entry
point; `engine` bridges graphs and rules to the compiled core (`_search`, from
csrc/); `partition`, `fold` and `check` cut large graphs, fold weights and check
the result in onnxruntime; `cost` holds the cost models."""
