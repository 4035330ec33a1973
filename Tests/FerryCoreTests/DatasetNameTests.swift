import FerryCore
import Testing

@Suite struct DatasetNameTests {
    @Test func baseNamesAndLines() {
        #expect(DatasetName.isValid("trips"))
        #expect(DatasetName.isValidBase("trips"))
        #expect(DatasetName.isValid("trips.v2"))
        #expect(!DatasetName.isValidBase("trips.v2"))
        #expect(DatasetName.split("trips.v12")! == ("trips", 12))
        #expect(DatasetName.split("trips")! == ("trips", nil))
        #expect(DatasetName.line(base: "trips", schemaVersion: 3) == "trips.v3")
        #expect(DatasetName.base(of: "a-b_c.v1") == "a-b_c")
        #expect(DatasetName.isValid(String(repeating: "a", count: 64) + ".v999999999"))
    }

    @Test(arguments: [
        "", ".v1", "trips.", "trips.v", "trips.v0", "trips.v01", "trips.v1234567890", "trips.x1", "trips.v1.v2",
        "..", "../etc", "trips/v1", "Trips", "trips.V1", "trips.v-1", "trips.v1 ", String(repeating: "a", count: 65),
        "trips..v1",
    ])
    func refused(_ name: String) {
        #expect(!DatasetName.isValid(name), "\(name)")
        #expect(DatasetName.split(name) == nil, "\(name)")
    }
}
