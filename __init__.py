"""attnscope: see attention in causal transformers.

One installed package with three parts, kept as top-level folders in the repository and installed
under this name (``pyproject.toml``, ``[tool.setuptools.package-dir]``):

- ``attnscope.model``: our GPT, its tokenizer, training, the backends (ours and transformers) and
  the capture of attention;
- ``attnscope.app``: the FastAPI service and the ``attnscope`` command line;
- ``attnscope.frontend``: the static page the service serves.

``python -m attnscope`` is the ``attnscope`` command. From Python::

    import attnscope
    lm = attnscope.load_model()          # the shipped model; or a path to a checkpoint folder

In a notebook (``pip install 'attnscope[notebook]'``)::

    attnscope.show("The cat sat on the mat.")                  # a widget; typing re-runs the model
    attnscope.show(text, model=model, tokenizer=tokenizer)     # a transformers model you loaded
    data = attnscope.capture(text)                             # the API's answer, numpy arrays

Over a corpus (``attnscope atlas`` on the command line; docs/ATLAS.md)::

    attnscope.atlas(["notes.txt"], "atlas/")                   # every head's metrics, as Parquet files
    attnscope.jlens(["notes.txt"], "lens.pt")                  # a Jacobian lens (docs/JLENS.md)
    attnscope.lens(text, lens="jacobian", jlens="lens.pt")     # what each block would say, read through it
"""

from .model import __version__

__all__ = ["__version__", "atlas", "capture", "jlens", "lens", "load_model", "show"]


def load_model(checkpoint=None, device: str | None = "cpu", dtype: str = "fp32"):
    """Open a model attnscope can show: ``None`` for the shipped one, else a checkpoint folder
    (ours, or any transformers causal LM on disk). Returns the loaded backend with its tokenizer."""
    from .model.registry import load_model as _load

    return _load(checkpoint, device=device, dtype=dtype)


def show(text: str | None = None, model=None, tokenizer=None, checkpoint=None, **options):
    """A notebook widget of attnscope's head view (:func:`attnscope.app.notebook.show`)."""
    from .app.notebook import show as _show

    return _show(text, model=model, tokenizer=tokenizer, checkpoint=checkpoint, **options)


def capture(text: str | None = None, model=None, tokenizer=None, checkpoint=None, **options):
    """What the API answers for ``text``, its matrices as numpy arrays (:func:`attnscope.app.notebook.capture`)."""
    from .app.notebook import capture as _capture

    return _capture(text, model=model, tokenizer=tokenizer, checkpoint=checkpoint, **options)


def atlas(corpus, out, checkpoint=None, model=None, **options):
    """A head atlas of ``corpus`` (file paths) written to the folder ``out``
    (:func:`attnscope.model.atlas.build.atlas`)."""
    from .model.atlas.build import atlas as _atlas

    return _atlas(corpus, out, checkpoint=checkpoint, model=model, **options)


def jlens(corpus, out, checkpoint=None, model=None, **options):
    """Fit a Jacobian lens over ``corpus`` (file paths) and write it to ``out``
    (:func:`attnscope.model.jlens.build.fit_lens`; ``model=``: an :func:`load_model` result)."""
    from .model.atlas.corpus import open_corpus
    from .model.jlens.build import fit_lens

    lm = model if model is not None else load_model(checkpoint)
    return fit_lens(lm, open_corpus(corpus), out, **options)


def lens(text: str, model=None, tokenizer=None, checkpoint=None, **options):
    """The logit lens or a Jacobian lens over ``text``, as ``POST /api/lens`` answers
    (:func:`attnscope.app.notebook.lens`)."""
    from .app.notebook import lens as _lens

    return _lens(text, model=model, tokenizer=tokenizer, checkpoint=checkpoint, **options)
