"""The benchmark suite: tokenizer-service against in-process tokenization, same texts, same run.

A package run from the repository root, so that its modules import each other as ``benchmarks.*`` and the
helpers shared with the tests as ``testkit.*``::

    python -m benchmarks.run [--smoke] [--out-dir DIR] ...   # every scenario, one table, JSON and plots
    python -m benchmarks.hot_path                             # the engine's hot path alone, no HTTP
    python -m benchmarks.dataloader_compare --out FILE        # the DataLoader comparison on its own
"""
