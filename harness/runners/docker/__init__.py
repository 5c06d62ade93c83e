"""The docker backend: one throw-away container per probe on one engine or a pool of them
(`runner`), the engine plumbing and images (`engine`), the pool (`pool`), the named volumes (`volumes`) and
ssh:// engines through OpenSSH (`ssh`).
"""
