"""Policies behind one sampler contract (Gaussian, diffusion, flow matching, VLA, residual): next milestone."""
