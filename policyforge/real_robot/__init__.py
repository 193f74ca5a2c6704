"""Robot driver contract, safety filter, fixed-rate control loop and drivers: a later milestone."""
