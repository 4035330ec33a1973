// Shared helpers for this target live in FerryTestSupport.
@_exported import FerryTestSupport
