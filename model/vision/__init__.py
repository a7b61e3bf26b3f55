"""Image-text-to-text models: the backend, image decoding, and one module per image layout."""
