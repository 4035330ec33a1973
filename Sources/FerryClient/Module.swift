// FerryClient: see docs/ARCHITECTURE.md
