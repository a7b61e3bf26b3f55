"""The transformer, its tokenizer, corpus, training and inspection. Never imports ``app``."""
