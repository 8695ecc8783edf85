import Testing
@testable import WorkerCore

/// `[GATT] Channels` read as bluetoothd 5.66 reads it (GLib key file, src/main.c).
@Suite struct BlueZMainConfTests {
    @Test func debiansShippedFileLeavesTheDefaultOfThreeBearers() {
        let shipped =
            "[General]\n#Name = BlueZ\n\n[GATT]\n# Number of ATT channels\n# Possible values: 1-5 (1 disables EATT)\n# Default to 3\n#Channels = 3\n\n[AVDTP]\n"
        #expect(BlueZMainConf.attChannels(in: shipped) == 3)
    }

    @Test(arguments: [
        ("[GATT]\nChannels = 1\n", 1),
        ("[GATT]\nChannels=1", 1),
        ("[GATT]\r\n  Channels\t=\t2  \r\n", 2),
        ("[GATT]\nChannels = 9\n", 5),
        ("[GATT]\nChannels = 0\n", 1),
        ("[GATT]\nChannels = -4\n", 1),
        ("[GATT]\nChannels = one\n", 3),
        ("[GATT]\nChannels =\n", 3),
        ("[GATT]\nChannels = 99999999999999999999999\n", 3),
        ("[GATT]\nchannels = 1\n", 3),
        ("[General]\nChannels = 1\n", 3),
        ("Channels = 1\n", 3),
        ("[GATT]\nChannels = 1\n[GATT]\nChannels = 4\n", 4),
        ("[GATT]\nChannels = 1\nChannels = 2\n", 2),
        ("[GATT]\nChannels = 1\nChannels = x\n", 1),
        ("[GATT\nChannels = 1\n", 3),
        ("[GATT]\nExchangeMTU = 48\nChannels 1\n", 3),
        ("", 3),
        ("\u{0}\u{1}[GATT]\u{0}", 3),
    ])
    func readsTheKeyAsBluetoothdDoes(text: String, expected: Int) {
        #expect(BlueZMainConf.attChannels(in: text) == expected)
    }

    @Test func anOversizedFileIsNotRead() {
        let huge = "[GATT]\nChannels = 1\n" + String(repeating: "#", count: BlueZMainConf.maxBytes)
        #expect(BlueZMainConf.attChannels(in: huge) == BlueZMainConf.defaultATTChannels)
    }
}
