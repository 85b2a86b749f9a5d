"""The project as a whole: the layers and stable paths, re-exports, docstring references,
README and docs links, the seed map, the demo."""
