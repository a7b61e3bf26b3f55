"""What the routes compute: plain functions over a loaded model, one module per resource."""
