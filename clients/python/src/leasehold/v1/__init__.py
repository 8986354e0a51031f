"""The generated messages and stubs of leasehold/v1/leasehold.proto (see gen_stubs.py)."""
