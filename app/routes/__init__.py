"""The HTTP routes, one ``APIRouter`` per resource; :func:`attnscope.app.main.create_app` includes them."""
