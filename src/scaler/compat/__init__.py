"""Other libraries' APIs on Scaler, for code written against them: scaler.compat.ray (import it as ray).

Each module maps the other API onto the Client; none imports or patches the library it imitates.
"""
