"""The worker runtime: the claim loop, attempts, steps, leases, acks and wake."""
