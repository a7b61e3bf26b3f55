"""Where models come from besides a folder of ours: the Hugging Face Hub cache (:mod:`.hub`),
GGUF files (:mod:`.gguf_header`, :mod:`.gguf_file`, :mod:`.gguf_load`), Ollama's store
(:mod:`.ollama`), and the listing of all of them (:mod:`.catalog`)."""
