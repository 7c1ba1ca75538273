"""What the profile tests' small zoo is made of (fixtures in ``conftest.py``)."""

#: A small zoo keeps these tests fast: S = 2 positions × V = 4 variants, 16 stitched.
VARIANTS = ("dense", "unstructured-0.5", "structured-0.5", "unstructured-0.9")
