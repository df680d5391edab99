"""The language-agnostic wire protocol: scaler.capnp (the contract) and its Python encoding."""
