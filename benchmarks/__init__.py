"""The benchmark suite, run from the repository root: tokenizer-service against in-process tokenization.

python -m benchmarks.run [--smoke] [--scenarios NAMES] [--out-dir DIR] ...   # one table, JSON and plots
python -m benchmarks.gpu_feed [--smoke] [--out DIR]                          # a GPU fed three ways
"""
