"""Speech-to-text encoder–decoders (Whisper): audio decoding, the model's features, and the words' times."""
