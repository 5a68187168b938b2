"""Tests of the pure ring package (placement, membership, hashing)."""
