"""This machine as the engine sees it: the torch device (`device.py`), the cache directory
compiled graphs and fetched files live in (`cache_directory.py`), and the data files shipped
inside PyPI packages (`packaged_data.py`)."""
