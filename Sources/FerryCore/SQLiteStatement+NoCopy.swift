import CSQLite

extension SQLiteStatement {
    /// Binds UTF-8 bytes as text **without copying** (`SQLITE_STATIC`): the bytes must stay valid and unchanged
    /// until the statement has stepped and the parameter is bound again or cleared (``reset()`` clears it).
    /// The bulk loader uses it to insert straight from libpq's row buffer.
    ///
    /// ```swift
    /// statement.bindTextNoCopy(rowBytes, at: 1)
    /// try statement.step()
    /// statement.reset()   // before rowBytes is freed
    /// ```
    @inlinable
    public func bindTextNoCopy(_ bytes: UnsafeRawBufferPointer, at index: Int32) {
        if let base = bytes.baseAddress {
            sqlite3_bind_text(handle, index, base.assumingMemoryBound(to: CChar.self), Int32(bytes.count), nil)
        } else {
            sqlite3_bind_text(handle, index, "", 0, sqliteTransient)
        }
    }

    /// Binds bytes as a blob without copying (`SQLITE_STATIC`); the same lifetime rule as ``bindTextNoCopy(_:at:)``.
    @inlinable
    public func bindBlobNoCopy(_ bytes: UnsafeRawBufferPointer, at index: Int32) {
        if let base = bytes.baseAddress {
            sqlite3_bind_blob(handle, index, base, Int32(bytes.count), nil)
        } else {
            sqlite3_bind_zeroblob(handle, index, 0)
        }
    }
}
