"""Why a head attends where it does, and what it changes: causal and linear tools over any backend.

The interventions run the model changed and compare: :mod:`.lens` (the final norm and unembedding
after every block), :mod:`.knockout` (chosen edges removed before the softmax) and :mod:`.patching`
(a clean run's pieces written into a corrupt run, batched).

The decompositions read the residual stream as a sum of what each component wrote into it, with
every norm's scale frozen at its value on the text, so each answer's parts add up exactly:

* :mod:`.norms`: a norm (LayerNorm, RMSNorm, Gemma's ``1 + weight``) as a linear map at fixed scale;
* :mod:`.components`: each component's write at chosen positions: the embeddings, every head's
  slice of the output projection, every MLP, and the biases (our GPT and transformers alike);
* :mod:`.attribution`: direct logit attribution, each write through the final norm and the
  unembedding;
* :mod:`.qk`: one head's raw score for one query and key, split into query-side × key-side terms.

A family or feature where such a split is not exact raises :class:`NotSplittable`, naming it.
"""

from __future__ import annotations


class NotSplittable(ValueError):
    """The model computes something the decomposition cannot split exactly; the message names it."""
