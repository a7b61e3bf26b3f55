"""Static browser app (HTML, CSS, ES modules), served by the FastAPI app at ``/``."""
