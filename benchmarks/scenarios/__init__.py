"""The benchmark's scenarios, one module each, every one against its in-process counterpart on the same texts.

- :mod:`~benchmarks.scenarios.batch_sizes` (scenario 1): one client, batches of 256, and a batch-size sweep;
- :mod:`~benchmarks.scenarios.concurrency` (scenario 2): concurrent clients, one text per request, batching
  on and off;
- :mod:`~benchmarks.scenarios.dataloader` (scenario 3): a DataLoader through the SDK collator
  (``benchmarks.dataloader_compare``);
- :mod:`~benchmarks.scenarios.long_texts` (scenario 4): tokens/s vs text length;
- :mod:`~benchmarks.scenarios.padding` (scenario 5): random vs token-budget vs packed batches through a
  DataLoader, and ``/lengths`` vs ``/encode`` (``benchmarks.padding_compare``);
- :mod:`~benchmarks.scenarios.rss_soak` ("rss"): server memory under rounds of the same load;
- :mod:`~benchmarks.scenarios.cpu_split` ("split"): one server process's CPU per batch, the GIL side against
  the Rust pool (``benchmarks.cpu_split``);
- :mod:`~benchmarks.scenarios.scaling` ("scaling"): the split, replicas and the workaround on 1 and 2 cores, and
  a projection to many cores with its model (``benchmarks.scaling``).

:mod:`~benchmarks.scenarios.measuring` holds what they share: the request options, the interleaved rounds
and the medians over them; :mod:`~benchmarks.scenarios.own_process` runs the scenarios that need a process of
their own (3 and 5).
"""
