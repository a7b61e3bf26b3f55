"""attnscope's FastAPI service and command line."""
