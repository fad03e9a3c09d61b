"""Pure simulations the suite's tool tasks run against: a file tree and a shell."""
