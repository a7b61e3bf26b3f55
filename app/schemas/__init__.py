"""Request and response models of the JSON API, one module per resource (``common`` what they share)."""
