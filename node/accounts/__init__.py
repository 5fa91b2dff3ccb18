"""Who may do what, where: accounts and their subject namespaces, authentication, permissions, and
the imports and exports that share subjects between accounts."""
