"""The samplers: one module each, holding its dynamics declaration and its PyMC step method."""
