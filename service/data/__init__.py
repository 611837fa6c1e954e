"""The SDK's data tools for PyTorch training code, a layer above the HTTP SDK (:mod:`service.client`):

- :mod:`.collate`: the collators a DataLoader's ``collate_fn`` takes (``client.collator()``,
  ``client.chat_collator()``);
- :mod:`.sampling`: batch samplers under a token budget;
- :mod:`.packing`: padding-free packed batches, as transformers' ``DataCollatorWithFlattening`` makes them;
- :mod:`.sft`: TRL's SFT preparation of conversations (labels from assistant masks) and its collation.

The SDK never imports this package but from ``client.collator()`` and ``client.chat_collator()``, when they
are called; torch and numpy are imported only when a batch is made.
"""
