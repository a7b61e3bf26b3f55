"""The Jacobian lens (Gurnee et al., 2026): the residual stream after a block, carried to the last block
by the average Jacobian ``J_l`` fitted over a corpus, then read by the final norm and the LM head.

* :mod:`.fit`: the definition, one prompt's ``J_l`` by batched backward passes;
* :mod:`.build`: the fit over a corpus (``attnscope jlens``), resumable, with a progress bar;
* :mod:`.lensfile`: the published ``.pt`` format, read back with ``weights_only=True``;
* :mod:`.readout`: the lens over a text, and each head's write read through its layer's ``J``.
"""
