"""Our own GPT and everything that makes it: the model (:mod:`.gpt`), its tokenizer, the corpus
builder, the trainer, the evaluation, our checkpoint format, GPT-2's format (:mod:`.gpt2_format`),
and the shipped checkpoint (``checkpoints/attnscope-small``)."""
