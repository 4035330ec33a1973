import Foundation

/// Deterministic bytes (byte i is i mod 251): what the test writes for scripts/lib/sigv4_check.py to read back.
func pattern(_ count: Int) -> Data { Data((0..<count).map { UInt8($0 % 251) }) }
