"""Expert streaming: a mixture-of-experts model whose experts stay on disk.

Only the shared layers (attention, norms, embeddings, routers) are loaded; each MoE layer
keeps a bank of a few expert slots and reads a routed expert's bytes from the safetensors
file when it is missing (``shared/MODELS.md`` §6). The modules, each with one job:

* ``safetensors_index``: where every tensor's bytes are in the files (headers only);
* ``policy``: which slot to give up (LRU, LFU) — pure;
* ``bank``: a layer's slots: reads, conversion into the serving form, the expert → slot map;
* ``switch``: the module put in place of mlx-lm's ``SwitchGLU``/``SwitchMLP`` (waves);
* ``plan``: the settings, the slot count and the memory a streamed tier will hold;
* ``stats``: hit and miss counts and read times, reported through a listener.
"""
