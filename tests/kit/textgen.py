"""Generated English-like sentences for the tests: a fixed grammar, reproducible from a seed."""

import random

SUBJECTS = ["the cat", "a small dog", "my brother", "the teacher", "our neighbour", "the old man", "she", "he", "they"]
VERBS = ["sat on", "looked at", "walked to", "opened", "painted", "found", "closed", "carried", "cleaned"]
OBJECTS = ["the mat", "a red door", "the window", "the garden", "a heavy box", "the kitchen", "the letter", "a map"]
ENDINGS = ["", " in the morning", " after lunch", " because it was warm", " with great care", " before the rain"]


def english_like(n_sentences: int, seed: int) -> list[str]:
    """``n_sentences`` short sentences from a fixed grammar, reproducible from ``seed``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_sentences):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}"
        out.append(s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?"]))
    return out
