/// A model's size in billions of parameters, as the coordinator's heartbeat takes it
/// (`activeModelParamSize`, a number: 1.5 for a "1.5B" model), from the text model
/// servers give (Ollama's `details.parameter_size`: "1.5B", "7.6B", "494.03M", "0.15M").
public enum ModelParameterSize {
    /// Billions from `<number><K|M|B|T>` (case-insensitive, no sign, one decimal point,
    /// at most 24 characters); nil for anything else, for zero, and from a million
    /// billion on.
    public static func billions(_ text: String) -> Double? {
        var trimmed = Substring(text)
        while trimmed.first == " " { trimmed.removeFirst() }
        while trimmed.last == " " { trimmed.removeLast() }
        guard trimmed.utf8.count >= 2, trimmed.utf8.count <= 24, let unit = trimmed.last else { return nil }
        let scale: Double
        switch unit {
        case "K", "k": scale = 1e-6
        case "M", "m": scale = 1e-3
        case "B", "b": scale = 1
        case "T", "t": scale = 1e3
        default: return nil
        }
        let number = trimmed.dropLast()
        guard number.first != ".", number.last != ".", number.filter({ $0 == "." }).count <= 1,
            number.allSatisfy({ ($0 >= "0" && $0 <= "9") || $0 == "." }),
            let value = Double(number), value.isFinite, value > 0
        else { return nil }
        let billions = value * scale
        // Beyond a million billion it is not a model; the bound also keeps Float finite.
        guard billions.isFinite, billions > 0, billions < 1e6 else { return nil }
        // Shortest float text: "494.03M" is 0.49403, not 0.49402999999999997.
        guard let rounded = Double("\(Float(billions))"), rounded.isFinite, rounded > 0 else { return billions }
        return rounded
    }
}
