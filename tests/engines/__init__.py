"""Tests against real engines (vLLM CPU build, llama.cpp's llama-server); marked `engine`."""
