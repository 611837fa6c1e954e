"""The benchmark suite: tokenizer-service against in-process tokenization, same texts, same run.

A package run from the repository root, so that its modules import each other as ``benchmarks.*`` and the
helpers shared with the tests as ``testkit.*``. One command runs every scenario (``benchmarks/scenarios/``, each
written on ``benchmarks/harness.py``); the GPU benchmark is its own, for the device machine::

    python -m benchmarks.run [--smoke] [--scenarios NAMES] [--out-dir DIR] ...   # one table, JSON and plots
    python -m benchmarks.gpu_feed [--smoke] [--out DIR]                          # a GPU fed three ways
"""
