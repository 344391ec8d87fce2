"""Who is calling, and may they: the layer in front of every route."""
