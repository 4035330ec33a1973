// FerryServer: see docs/ARCHITECTURE.md
